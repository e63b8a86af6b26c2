"""The Textual app: screens, widgets and styles only.

Every llama.cpp or network call runs in a thread worker (see workers.py); the
workers post messages and never touch a widget.
"""
