"""flashcourse — the course's Python tools as one small package; the scripts in tools/ are thin
command lines over it, and import nothing from each other.

    results    the results file of docs/results_schema.md: new, write, read, check, merge rows
    tolerance  the tolerance rule of docs/tolerance.md, as common/src/verify.cpp computes it
    npy        the .npy files of the stages' --load and --save, without NumPy
    cli        one-line usage errors, sizes, a stage run with a time limit, the closing summary
    anchors    PyTorch's SDPA backends timed as anchor rows (torch passed in, never imported here)
    reference  attention from its definition in PyTorch, and the rule's verdict on tensors
    decoding   the decoding comparisons' cases, rows and rates
    guard      bad input as one line and exit 2: JSON read with limits, checked numbers, text safe for
               a terminal and a figure, one-line argument errors, the handler every tool's main runs under

Standard library only: PyTorch is needed by the comparisons that run it, NumPy by no part.
"""
