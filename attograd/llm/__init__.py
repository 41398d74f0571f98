"""Language models read from GGUF files: tokenizers, the model, sampling and a chat front end."""
