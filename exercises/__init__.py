"""Interview exercises run against the project's own code.

Each folder holds one exercise: its prompt (``README.md``), a starter with the signatures
(``starter.py``), a short account of how the reference does it, the suite (``suite.py``) that
runs against the reference or a candidate's file, and known-wrong answers (``wrong/``) the suite
must reject. ``catalog.py`` lists them; ``gpucloud exercises`` runs them (docs/exercises.md).
"""
