"""The built-in systems, one folder each; every folder registers itself as a user's module does."""
