"""The package as a user installs it: the built wheel, outside the tree."""
