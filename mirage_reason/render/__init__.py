"""Answers rendered for people: the HTML page."""
