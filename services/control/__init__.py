"""Control loops: a work queue, controllers that reconcile its keys, and the manager that owns them."""
