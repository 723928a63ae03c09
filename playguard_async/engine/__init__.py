"""The reactor: ticks, wake-ups, follow-ups, drain and resume, and one cycle's run under its lease.
It knows phases only through ``playguard_async.phases.protocol`` and hosts only by
``playguard_async.remote.reach``; the service layer hands it both."""
