"""The conductor: claims work, holds node reservations and runs the flows."""
