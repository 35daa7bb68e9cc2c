"""Check stages beyond the core ones; each module registers its stages with ``runner.register_stage``."""
