"""The hang doctor: fed a look of its node every second, it shares it with node 0, which judges (the verdict
and the account of a timeout are pure functions) and, on a hang, writes every rank's stack and ends the job."""
