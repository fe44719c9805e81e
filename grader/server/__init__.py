"""The course server (`grade serve`): students upload submissions, workers on a Celery/Redis queue grade them
with the batch's grading function, the results live in a SQL database (SQLite or PostgreSQL)."""
