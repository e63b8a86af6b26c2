"""Models from the Hugging Face hub: headers read by range request, resumable verified downloads, the shared cache.

Plain Python, free of textual: the command line and the app drive it alike and
receive progress as `DownloadProgress` values.
"""
