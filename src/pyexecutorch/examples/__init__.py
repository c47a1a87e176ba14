"""Built-in example models for the demo and the command line.

- :mod:`pyexecutorch.examples.gpt`: a small GPT-style language model that decodes
  one token per call with its KV cache held in mutable buffers (imports torch).
- :mod:`pyexecutorch.examples.generate`: greedy generation over any step function,
  and the torch-free worker that runs an exported model in our runtime.
- :mod:`pyexecutorch.examples.text_llm`: the demo's text part, a small random-weight
  Hugging Face Llama and a tokenizer trained on the spot (imports torch, transformers).
"""
