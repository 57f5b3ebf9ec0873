"""What a command in a simulated sandbox does: its drawn fate, the modelled shell, or a real one under bubblewrap."""
