"""The engine: one run of one method on one task, from building the models to one record
per target (load → unlearn → evaluate → record). It knows no particular method or task:
both come through the plugin registry."""
