"""The operator's console: the admin site (its menu and its dashboard home page), the dashboard's figures, and
what the admin's templates need (template tags, the vendored chart library under static/console/)."""
