"""Faults over SSH that always heal: journaled on the host before they are applied, reverted by
a dead-man process on the host at their deadline even if the controller dies, verified gone."""
