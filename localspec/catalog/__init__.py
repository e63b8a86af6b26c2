"""The pairs localspec knows: models.toml, the user's additions, and their files on disk."""
