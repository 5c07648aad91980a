"""Notification channels: where a team's alerts go, and their delivery.

kinds.py (each kind's check and send: email, signed webhook, Apprise for the chat and paging
services), guarded_http.py (Apprise's connections through the outbound guard), messages.py
(what an alert says), delivery.py (events, delivery rows, retries, the tasks), service.py (the
one write service for channels).
"""
