"""The ground floor: process and number utilities every room may import; it imports nothing of ours.

They lived in providers/ only because it was the lowest floor; here no room reaches across another to use them.
"""
