"""BANG-on-CPU emulator."""
