"""In-sandbox build and run harness."""
