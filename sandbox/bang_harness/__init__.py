"""In-sandbox build and run harness (DESIGN.md, "Harness protocol").

Runs inside the sandbox with the student's code: it depends only on the standard library, numpy and torch
(plus bang_emu on the emulator backend) and imports nothing from `grader`.
"""
