"""The batch GAHP (the blahp's job): jobs on fork, Slurm, Grid Engine, PBS and LSF."""
