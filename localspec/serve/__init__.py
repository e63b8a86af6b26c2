"""`localspec serve`: the engine behind an OpenAI- and llama.cpp-compatible HTTP server, for editors and agents."""
