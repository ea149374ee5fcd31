"""Data strategies used by the schedulers: curriculum, budget allocation, filtering, replay."""
