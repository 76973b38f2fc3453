"""Inventory: hosts, clusters and credentials by reference; loading (own + Ansible shape); SSH."""

from chaoskit.inventory.loader import load_inventory
from chaoskit.inventory.models import Cluster, Host, Inventory, Member
from chaoskit.secrets import SecretRef

__all__ = ["Cluster", "Host", "Inventory", "Member", "SecretRef", "load_inventory"]
