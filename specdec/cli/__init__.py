"""The composition root: the `specdec` command (specdec.cli.main) and the tools behind it. Only this
package imports the services (draft_service, verify_service) and the gateway; the core and
specdec/serving never do. Nothing is imported here: a module of the package that the package's
__init__ imported back would be a cycle (`python -m specdec.cli.main` would load main.py twice)."""
