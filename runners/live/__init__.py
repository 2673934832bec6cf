"""Live delivery of runs: the one publisher of run events and statuses after commit (`publish`), the channel
layer it publishes on (`layers`), the cancel signal to the owning worker (`cancel`) and the replay → live seam
of every subscriber (`streaming`)."""
