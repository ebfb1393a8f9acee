"""Analysis: reads run directories and models; the trainer never imports it."""
