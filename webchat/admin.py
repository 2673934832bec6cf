"""What the debug chat app adds to other apps' admin pages (Django's admin autodiscovery imports this module):
the website chat widget's embed snippet on a web bot's page (`webchat.widget_admin`)."""

from webchat.widget_admin import widget_admin_extend

widget_admin_extend()
