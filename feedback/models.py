"""Disambiguation events, learning signals, agent outcomes, feedback records and mistake patterns."""
