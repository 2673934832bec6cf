"""One module (or package) per chat platform, each implementing the adapter interface."""
