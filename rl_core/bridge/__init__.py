"""The lab's runs carried to other frameworks: a configuration exported to TRL, verl and OpenRLHF, a run written in
UNIPO's log schema, and the same run trained by TRL beside the lab's trainer (in TRL's own virtualenv)."""
