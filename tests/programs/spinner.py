"""Keeps one core busy until killed: a program that uses the CPU, for the tests of what the node
measures of other programs.
"""

while True:
    pass
