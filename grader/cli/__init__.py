"""The `grade` command line (app.py); thin: each verb calls one library function and renders its result."""
