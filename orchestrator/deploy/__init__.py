"""Deploy targets: start a LaunchPlan, wait until it is healthy, always tear it down."""
