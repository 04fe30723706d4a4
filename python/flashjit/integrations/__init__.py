"""flashjit behind other libraries' attention interfaces. Each module
imports its library on import, so `import flashjit` never needs them:

    import flashjit.integrations.transformers  # attn_implementation="fjit"
"""
