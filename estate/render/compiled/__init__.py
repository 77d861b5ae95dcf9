"""Estate's templates, compiled ahead (estate.render.templates)."""
