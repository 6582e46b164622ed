"""The bottom layer: errors, catalog paths, redaction and safe file operations; imports nothing of kernel_atlas."""
