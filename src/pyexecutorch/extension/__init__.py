"""Extensions beside the runtime: model families with their own runners and recipes."""
