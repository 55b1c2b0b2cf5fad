"""Training: examples selected from the lake with SQL, a LightningModule over the policies, DeepSpeed on CUDA.

Import the parts directly (`aitp.train.run.train`, `aitp.train.config.TrainConfig`): this package
file imports nothing, so a GPU machine without the lake's or MLflow's dependencies can use
`aitp.train.module`, `.strategy` and `.checkpoint` alone.
"""
