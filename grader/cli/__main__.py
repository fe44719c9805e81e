"""`python -m grader.cli` = the `grade` command."""

from grader.cli.entry import main

main()
