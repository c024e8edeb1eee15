"""flashcourse.plotting — matplotlib for the figure scripts: drawn to files (the Agg backend, no
display needed), or one line that says how to get it where it is missing."""
import sys


def pyplot(program):
    """matplotlib.pyplot set to draw into files; None, after one line on stderr, without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(f"{program}: error: matplotlib is not installed for {sys.executable} "
              "(Debian: python3-matplotlib; try /usr/bin/python3)", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
