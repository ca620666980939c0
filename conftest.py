"""Every nbval run of solutions/ and labs/ also checks the statuses of the check cells."""

pytest_plugins = ["nanlab.course.pytest_plugin"]
