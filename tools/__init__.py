"""Documentation and fixture tooling: `python -m tools.render_docs`, `python -m tools.check_docs_commands`."""
