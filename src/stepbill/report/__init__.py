"""Formatting of bills: terminal tables, JSON. No arithmetic of the bill lives here."""
