"""The questions stage: what is asked and how an answer ends. problems (the paper's generators, Alg. 1), prompts
(the paper's few-shot templates, tab:prompt_add / tab:prompt_mul), answers (the answer modes: where generation
stops, its budget, what is read) and thinking (the markers that close a reasoning model's thinking). Above core."""
