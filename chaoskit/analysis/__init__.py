"""Turn a recorded history into figures and verdicts. Checkers never raise: a crash is `unknown`."""
