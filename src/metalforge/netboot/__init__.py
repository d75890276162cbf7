"""Network boot of the agent's ramdisk: iPXE scripts and the deploy images they load."""
