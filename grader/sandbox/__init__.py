"""Host side of isolation: the runners that run a harness phase (docker, bwrap, process, Kubernetes pod),
the choice among them (select.py), sandbox images, limits and size-capped readers of what a run wrote back."""
