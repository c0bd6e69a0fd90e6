"""The ``gpucloud`` command: run a control plane, run the demo, and call the API."""
