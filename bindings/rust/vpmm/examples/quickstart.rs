use vpmm::{AllocAttrs, Config, Pool, Stream};

fn main() -> vpmm::Result<()> {
    let pool = Pool::new(&Config::from_env())?; // CUDA if a GPU is usable, else host
    let attrs = AllocAttrs::new().tag("weights").host_backup(true);
    let _weights = pool.alloc_with(256 << 20, Stream::DEFAULT, &attrs)?; // freed on drop
    pool.pause(Some("weights"))?; // memory released, bytes kept on the host
    pool.resume(Some("weights"))?; // same address, same bytes
    println!("mapped {} bytes", pool.stats().mapped_bytes);
    Ok(())
}
