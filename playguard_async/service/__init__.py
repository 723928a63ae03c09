"""The daemon as a service: wiring the layers together from the settings, the HTTP endpoints,
systemd, metrics, logging set-up and webhook notifications."""
