"""The conformance corpus: each test is an export case in the form users write."""
