"""`python -m grader.cli` = the `grade` command."""

from grader.cli.app import main

main()
