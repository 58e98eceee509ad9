"""The paper's few-shot prompts as data files (appendix tables tab:prompt_add and tab:prompt_mul).

``add.txt`` serves integer addition and iterated addition, ``mul.txt`` multiplication. ``<base>`` is
replaced by the base; the last ``<Expression>`` is the slot for the problem (the first one is part of
the format line ``<Expression> = <Result>`` and stays as written). The examples are verbatim from the
paper, including its ``32 + 78= 110``.
"""
