"""compress: distill, prune, quantize, export and measure BERT classifiers."""
__version__ = "0.1.0"
