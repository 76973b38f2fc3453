"""Fakes shipped with the package, so tests of code with side effects need no deep patching."""
