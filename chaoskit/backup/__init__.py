"""Backups and restores as actions of a drill: one module per tool (`backup.tool` in the inventory)."""
